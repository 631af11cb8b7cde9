#pragma clang diagnostic ignored "-Wmissing-prototypes"

#include <metal_stdlib>
#include <simd/simd.h>

using namespace metal;

struct _6
{
    uint _m0;
    uint _m1;
    uint _m2;
    uint _m3;
    uint _m4;
    uint _m5;
    int _m6;
    int _m7;
    int _m8;
    int _m9;
    int _m10;
    int _m11;
    int _m12;
    uint _m13;
    uint _m14;
    uint _m15;
    uint _m16;
    uint _m17;
    uint _m18;
    uint _m19;
    uint _m20;
    uint _m21;
    uint _m22;
    uint _m23;
    uint _m24;
    float _m25;
};

struct _10
{
    float _m0[1];
};

struct _13
{
    float _m0[1];
};

struct _16
{
    _6 _m0;
};

static inline __attribute__((always_inline))
uint _18(uint _20, uint _21)
{
    return _20 % ((_21 == 0u) ? 1u : _21);
}

static inline __attribute__((always_inline))
uint _29(uint _30, uint _31)
{
    return _30 / ((_31 == 0u) ? 1u : _31);
}

kernel void main0(const device _10& _9 [[buffer(0)]], device _13& _12 [[buffer(1)]], const device _16& _15 [[buffer(2)]], uint3 gl_WorkGroupID [[threadgroup_position_in_grid]], uint3 gl_NumWorkGroups [[threadgroups_per_grid]], uint gl_LocalInvocationIndex [[thread_index_in_threadgroup]])
{
    uint _54 = 0u;
    float _57 = 0.0;
    uint _67 = (((gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x) * 64u) + gl_LocalInvocationIndex;
    if (_67 >= _15._m0._m0)
    {
        return;
    }
    _54 = _67;
    uint _78 = _18(_54, _15._m0._m5);
    int _84 = int(_78) - int(_15._m0._m18);
    _54 = _29(_54, _15._m0._m5);
    uint _93 = _18(_54, _15._m0._m4);
    int _99 = int(_93) - int(_15._m0._m17);
    _54 = _29(_54, _15._m0._m4);
    uint _108 = _18(_54, _15._m0._m3);
    int _114 = int(_108) - int(_15._m0._m16);
    _54 = _29(_54, _15._m0._m3);
    uint _123 = _18(_54, _15._m0._m2);
    int _129 = int(_123) - int(_15._m0._m15);
    _54 = _29(_54, _15._m0._m2);
    uint _137 = _18(_54, _15._m0._m1);
    int _143 = int(_137) - int(_15._m0._m14);
    _54 = _29(_54, _15._m0._m1);
    int _154 = int(_54) - int(_15._m0._m13);
    _57 = _15._m0._m25;
    if ((((((((((((_154 >= 0) && (_154 < int(_15._m0._m19))) && (_143 >= 0)) && (_143 < int(_15._m0._m20))) && (_129 >= 0)) && (_129 < int(_15._m0._m21))) && (_114 >= 0)) && (_114 < int(_15._m0._m22))) && (_99 >= 0)) && (_99 < int(_15._m0._m23))) && (_84 >= 0)) && (_84 < int(_15._m0._m24)))
    {
        _57 = _9._m0[uint((((((_15._m0._m12 + (_154 * _15._m0._m6)) + (_143 * _15._m0._m7)) + (_129 * _15._m0._m8)) + (_114 * _15._m0._m9)) + (_99 * _15._m0._m10)) + (_84 * _15._m0._m11))];
    }
    _12._m0[_67] = _57;
}

