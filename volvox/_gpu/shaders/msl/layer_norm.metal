#pragma clang diagnostic ignored "-Wmissing-prototypes"
#pragma clang diagnostic ignored "-Wmissing-braces"

#include <metal_stdlib>
#include <simd/simd.h>

using namespace metal;

template<typename T, size_t Num>
struct spvUnsafeArray
{
    T elements[Num ? Num : 1];
    
    thread T& operator [] (size_t pos) thread
    {
        return elements[pos];
    }
    constexpr const thread T& operator [] (size_t pos) const thread
    {
        return elements[pos];
    }
    
    device T& operator [] (size_t pos) device
    {
        return elements[pos];
    }
    constexpr const device T& operator [] (size_t pos) const device
    {
        return elements[pos];
    }
    
    constexpr const constant T& operator [] (size_t pos) const constant
    {
        return elements[pos];
    }
    
    threadgroup T& operator [] (size_t pos) threadgroup
    {
        return elements[pos];
    }
    constexpr const threadgroup T& operator [] (size_t pos) const threadgroup
    {
        return elements[pos];
    }
};

struct _5
{
    uint _m0;
    uint _m1;
    float _m2;
    uint _m3;
};

struct _11
{
    float _m0[1];
};

struct _14
{
    float _m0[1];
};

struct _17
{
    float _m0[1];
};

struct _20
{
    float _m0[1];
};

struct _23
{
    _5 _m0;
};

constant spvUnsafeArray<float, 64> _27 = spvUnsafeArray<float, 64>({ 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0 });

kernel void main0(const device _11& _10 [[buffer(0)]], const device _14& _13 [[buffer(1)]], const device _17& _16 [[buffer(2)]], device _20& _19 [[buffer(3)]], const device _23& _22 [[buffer(4)]], uint3 gl_WorkGroupID [[threadgroup_position_in_grid]], uint3 gl_NumWorkGroups [[threadgroups_per_grid]], uint gl_LocalInvocationIndex [[thread_index_in_threadgroup]])
{
    float _57 = 0.0;
    uint _60 = 32u;
    float _63 = 0.0;
    float _51 = 0.0;
    uint _56 = 32u;
    uint2 _91 = uint2(4294967295u);
    uint2 _128 = uint2(4294967295u);
    uint2 _169 = uint2(4294967295u);
    uint2 _204 = uint2(4294967295u);
    uint2 _250 = uint2(4294967295u);
    threadgroup float _25[64];
    uint _70 = (gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x;
    if (_70 >= _22._m0._m0)
    {
        return;
    }
    uint _79 = _22._m0._m1;
    uint _80 = _70 * _79;
    uint _53 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(uint2(0u) == _91))
        {
            break;
        }
        _91 -= uint2(uint(_91.y == 0u), 1u);
        if (!(_53 < _22._m0._m1))
        {
            break;
        }
        _51 += _10._m0[_80 + _53];
        _53 += 64u;
        continue;
    }
    _25[gl_LocalInvocationIndex] = _51;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (;;)
    {
        if (all(uint2(0u) == _128))
        {
            break;
        }
        _128 -= uint2(uint(_128.y == 0u), 1u);
        if (!(_56 > 0u))
        {
            break;
        }
        if (gl_LocalInvocationIndex < _56)
        {
            _25[gl_LocalInvocationIndex] += _25[gl_LocalInvocationIndex + _56];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        _56 = _56 >> 1u;
        continue;
    }
    float _160 = _25[0u];
    uint _162 = _22._m0._m1;
    float _164 = _160 / float(_162);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    uint _58 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(uint2(0u) == _169))
        {
            break;
        }
        _169 -= uint2(uint(_169.y == 0u), 1u);
        if (!(_58 < _22._m0._m1))
        {
            break;
        }
        float _192 = _10._m0[_80 + _58] - _164;
        _57 += (_192 * _192);
        _58 += 64u;
        continue;
    }
    _25[gl_LocalInvocationIndex] = _57;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (;;)
    {
        if (all(uint2(0u) == _204))
        {
            break;
        }
        _204 -= uint2(uint(_204.y == 0u), 1u);
        if (!(_60 > 0u))
        {
            break;
        }
        if (gl_LocalInvocationIndex < _60)
        {
            _25[gl_LocalInvocationIndex] += _25[gl_LocalInvocationIndex + _60];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
        _60 = _60 >> 1u;
        continue;
    }
    float _245 = 1.0 / sqrt((_25[0u] / float(_22._m0._m1)) + _22._m0._m2);
    uint _61 = gl_LocalInvocationIndex;
    for (;;)
    {
        if (all(uint2(0u) == _250))
        {
            break;
        }
        _250 -= uint2(uint(_250.y == 0u), 1u);
        if (!(_61 < _22._m0._m1))
        {
            break;
        }
        _63 = ((_10._m0[_80 + _61] - _164) * _245) * _13._m0[_61];
        if (_22._m0._m3 != 0u)
        {
            _63 += _16._m0[_61];
        }
        _19._m0[_80 + _61] = _63;
        _61 += 64u;
        continue;
    }
}

