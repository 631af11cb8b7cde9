#pragma clang diagnostic ignored "-Wmissing-prototypes"

#include <metal_stdlib>
#include <simd/simd.h>

using namespace metal;

struct _4
{
    uint _m0;
    uint _m1;
};

struct _9
{
    float _m0[1];
};

struct _12
{
    float _m0[1];
};

struct _15
{
    _4 _m0;
};

static inline __attribute__((always_inline))
uint _17(uint _19, uint _20)
{
    return _19 / ((_20 == 0u) ? 1u : _20);
}

static inline __attribute__((always_inline))
uint _28(uint _29, uint _30)
{
    return _29 % ((_30 == 0u) ? 1u : _30);
}

kernel void main0(const device _9& _8 [[buffer(0)]], device _12& _11 [[buffer(1)]], const device _15& _14 [[buffer(2)]], uint3 gl_WorkGroupID [[threadgroup_position_in_grid]], uint3 gl_NumWorkGroups [[threadgroups_per_grid]], uint gl_LocalInvocationIndex [[thread_index_in_threadgroup]])
{
    uint _61 = (((gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x) * 64u) + gl_LocalInvocationIndex;
    if (_61 >= _14._m0._m0)
    {
        return;
    }
    uint _70 = _17(_61, _14._m0._m1);
    uint _73 = _28(_61, _14._m0._m1);
    uint _78 = ((_70 * 2u) * _14._m0._m1) + _73;
    _11._m0[_61] = (_8._m0[_78] / (1.0 + exp(-_8._m0[_78]))) * _8._m0[(((_70 * 2u) * _14._m0._m1) + _14._m0._m1) + _73];
}

